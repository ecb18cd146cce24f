"""Background jobs: the job worker, the kinds it runs, and their fenced statements (issue 10)."""
