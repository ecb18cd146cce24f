"""`make mutants`: each fence of the SQL broken in turn, and the behaviour tests that guard it run against
the broken copy (see __main__.py)."""
