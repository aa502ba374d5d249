import sys

from gpu_portal_cli.main import main

sys.exit(main())
