"""Length functions for `datareel prepare --lengths` in tests (importable by worker processes)."""


def text_length(sample):
    return len(sample["txt"])


def json_length(sample):
    return len(sample["json"]["text"])
