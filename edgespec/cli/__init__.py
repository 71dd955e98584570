"""The command line: `main.main` is the click group (`edgespec.__main__` runs it); one module per
command, and `common` for the options and error handling they share."""
