"""The ground floor: errors, files, seeding, distributed helpers, metrics and tables. Imports nothing of ours."""
