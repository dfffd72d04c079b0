"""Command-line interface: ``psdsf-dist <command>``; one module per command."""
