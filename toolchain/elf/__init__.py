"""ELF reading and checking. Only `lief_adapter` imports lief."""
