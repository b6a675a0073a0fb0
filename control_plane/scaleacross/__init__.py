"""ScaleAcross Explorer: plan one training job over several data-center buildings.

Modules: :mod:`scenario` (input files), :mod:`formulas` (closed forms), :mod:`cost` (vectorized
analytical model), :mod:`simulate` (discrete-event check), :mod:`search`, :mod:`validate`
(calibration on published runs), :mod:`netplan` (plan -> network), :mod:`cli`.
After Li et al., "ScaleAcross Explorer" (arXiv 2605.24326, 2026); the model is this project's.
"""
