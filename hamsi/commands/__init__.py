"""Sub-commands of the `hamsi` CLI, one module each (see hamsi.cli)."""
