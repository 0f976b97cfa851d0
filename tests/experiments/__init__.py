import csv


def read_rows(path):
    """The rows of the CSV at ``path`` as dicts (csv.DictReader)."""
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))
