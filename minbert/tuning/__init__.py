"""What search.py is made of: the search space (space.py), the study and its workers (study.py), and what a study
leaves behind to read (report.py)."""
