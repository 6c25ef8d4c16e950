"""PP-DocLayoutV3 (layout detection): the family's package; its registry entry is family.py."""
