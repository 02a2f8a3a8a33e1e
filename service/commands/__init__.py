"""The `gpuhealth` command line: `cli` parses and dispatches; one module per subcommand."""
