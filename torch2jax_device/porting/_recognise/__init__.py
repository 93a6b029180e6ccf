"""Recognising idioms: one module per section of the idiom catalog.

``detect(file)`` walks a parsed file (``visitor.Detector``) and hands each node to the
section that recognises it (``devices``, ``placement``, ``creation``, ``checkpoints``,
``feeding``, ``environment``, ``distributed``, ``dlpack`` for the DLPack exchanges,
``helpers`` for the project's own helpers that place, load or build a launcher, and
``names`` for the rows the catalog's tables cover). Each proposes ``Candidate``s;
``_plan`` decides which rewrites stand. A new idiom goes in its section's module, called
from the visitor. After the walk, ``device_literals`` reports the devices named in string
literals on lines no section's finding covers (CONTRIBUTING's labelling conventions).
"""

from __future__ import annotations

from .._candidate import Candidate
from .._source import SourceFile
from . import device_literals, device_strings
from .visitor import Detector

__all__ = ["detect"]


def detect(file: SourceFile) -> list[Candidate]:
    """Every candidate finding of one file, in the order the walk meets them."""
    detector = Detector(file)
    detector.visit(file.tree)
    device_strings.point_at_tests(detector)
    device_literals.uncovered_names(detector)
    return detector.found
