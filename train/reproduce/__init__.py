"""Reproduction tables for five papers at reduced scale, the papers' numbers beside ours.

    python -m train.reproduce <000|001|002|003|004|all> [--quick] [--data digits|npz:PATH|NAME] [--out DIR]

The selectors name the papers: ``000`` Stowell 2026 (torus embeddings, :mod:`.torus`), ``001`` Korman 2021
(atlas target spaces, :mod:`.atlas`), ``002`` Hong, Meng & Yuan 2018 (Tensorized Projection vs ITQ,
:mod:`.binary`), ``003`` Feeney & Hughes 2024 (similarities × supervised contrastive losses,
:mod:`.similarities`), ``004`` Bouhsine et al. 2024 (the SimO loss, :mod:`.simo`), each module holding its
paper's record; :mod:`.papers` lists them (a new paper is a new module and its entry there). What they share
is in :mod:`.common` (the paper record, the scales, the run helper), :mod:`.records` (claim and run records),
:mod:`.rules` (the statistics and verdict rules) and :mod:`.tables` (the tables of a paper's section), the
page's Markdown in :mod:`.render`, the command line in ``__main__.py``.
"""
