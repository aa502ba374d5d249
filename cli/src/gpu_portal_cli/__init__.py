"""GPU Portal's command line: `gpu-portal --help`."""
