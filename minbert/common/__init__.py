"""The ground floor: errors, files, seeding, distributed helpers, metrics, tables and evaluation's batch order. Imports
nothing of ours."""
