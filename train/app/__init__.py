"""The training application (``python -m train``): its configuration and the registrations every choice
declares, data, model, objective, optimiser, the jitted step, the loop with its checkpoints, and the run's
report. :mod:`train.app.cli` is the command line; :mod:`train.app.notebook` runs it from a notebook.

It needs the ``train`` extra (``pip install 'geojax[train]'``): importing it without raises
:class:`train.MissingExtra`, which names what is missing."""

from train import require_extra

require_extra()
