"""Book.fits does the steps of adding the request, checking and taking it away again (two
`add`s) on the path's numbers alone, and keeps its answers per those numbers: the same answer,
word for word, and the same book after, bit for bit (fractional requests do not always come
back to the number they left), as the two adds; the version moves only where a number moved."""
from __future__ import annotations

import copy
import random

import pytest

from dlsched.tenancy.book import ROOT, Book, _EPS, unit
from dlsched.tenancy.tree import load_queues

TREES = [
    "queues:\n  - {name: a, quotas: {gpu: {nominal: 4}}}\n  - {name: b, quotas: {gpu: {nominal: 4, borrowing_limit: 0}}}\n"
    "  - {name: c, quotas: {gpu: {nominal: 2.5, limit: 5.5}}}\n",
    "queues:\n  - {name: co, quotas: {gpu: {nominal: 1, borrowing_limit: 3.3}}}\n"
    "  - {name: x, parent: co, quotas: {gpu: {nominal: 0.3, lending_limit: 0.2}, cpu: {nominal: 7.7}}}\n"
    "  - {name: y, parent: co, quotas: {gpu: {nominal: 2, lending_limit: 1}, mem_gb: {nominal: 12.8, limit: 20}}}\n"
    "  - {name: z, quotas: {gpu: {nominal: 16}, cpu: {nominal: 0.1}}}\n",
]


def two_adds(book: Book, leaf: str, req: dict) -> str:
    """Book.fits as it was: add, check, add -1."""
    need = {r: x for r, x in req.items() if x > _EPS}
    if not need:
        return ""
    before = {r: book.balance(ROOT, r) for r in need}
    book.add(leaf, need)
    try:
        for x in book.path(leaf):
            for r in need:
                if book.usage[x][r] > book.limit(x, r) + _EPS:
                    return (f"over its limit: {x} would use {book.usage[x][r]:g} of at most "
                            f"{book.limit(x, r):g} {unit(r)}")
                if book.balance(x, r) < -book.borrowing_limit(x, r) - _EPS:
                    return book._why(leaf, x, r, need[r], before[r], book.usage[leaf][r] - need[r])
        return ""
    finally:
        book.add(leaf, need, -1.0)


def numbers(book: Book) -> list:
    return [(n, r, book.usage[n][r].hex(), float(book.bal[n][r]).hex()) for n in book.usage for r in book.usage[n]]


@pytest.mark.parametrize("tree", range(len(TREES)))
def test_fits_is_the_two_adds_bit_for_bit(tmp_path, tree):
    q = tmp_path / "q.yaml"
    q.write_text(TREES[tree])
    t = load_queues(q)
    rng = random.Random(tree)
    book = Book(t, {"gpu": 2.2})
    leaves, sizes = list(t.leaves), [0.0, 0.1, 0.2, 0.3, 0.7, 1.0, 2.7, 8.0]
    moved = 0
    for _ in range(3000):
        leaf = rng.choice(leaves)
        if rng.random() < 0.5:
            book.add(leaf, {r: rng.choice(sizes) for r in book.resources}, rng.choice([1.0, -1.0]))
        req = {r: rng.choice(sizes) for r in book.resources}
        ref, before = copy.deepcopy(book), numbers(book)
        v = book.version
        assert book.fits(leaf, req) == two_adds(ref, leaf, req)
        assert numbers(book) == numbers(ref)
        assert (book.version != v) == (numbers(book) != before)
        moved += numbers(book) != before
    assert moved                 # some questions did not leave the book as it was
