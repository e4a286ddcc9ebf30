"""Record schemas (records.py) and Delta table specs (tables.py): one source for the codec,
the table DDL, the quality checks and the test fixtures."""
