"""Metrics of the three tasks and the course's prediction files."""
