"""ELF reading (reader.py, the one reader: headers, segments, dynamic section, symbols, notes), loader-style
symbol binding (resolve.py), configuration records (config_records.py) and the one writer (patcher.py, the
only module that imports lief)."""
