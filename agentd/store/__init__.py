"""All SQL lives here: named queries in sql/*.sql wrapped by typed functions per table."""
