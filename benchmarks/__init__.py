"""One script per figure, runnable on their own; a package so tests can import them."""
