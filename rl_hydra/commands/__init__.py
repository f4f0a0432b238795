"""What users call: the command-line tools (cli, suite, report, resume), the Python API (api, run)
and the one way a run starts (launch)."""
