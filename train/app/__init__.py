"""The training application (``python -m train``): its configuration and the registrations every choice
declares, data, model, objective, optimiser, the jitted step, the loop with its checkpoints, and the run's
report. :mod:`train.app.cli` is the command line; :mod:`train.app.notebook` runs it from a notebook."""
