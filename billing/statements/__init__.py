"""Monthly chargeback statements: closing a month into sealed lines (`services`, `lines`), the
credits for GPU time after hardware XIDs (`xid_credits`), corrections as adjustments, and their
pages, API and files (`views`, `api`, `exports`)."""
