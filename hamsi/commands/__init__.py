"""hamsi's `hamsi` sub-commands (one module each; hamsi.registry names them, hamsi.cli_io is what they share)."""
