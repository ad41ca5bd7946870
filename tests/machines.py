"""Machines for tests of textbook formulas: the presets without their calibration, so that every
figure is the datasheet's (the calibrated machine prices the same operators with fitted
efficiencies, overheads and overlap; its own tests say so)."""

from __future__ import annotations

import dataclasses

from stratopt.machine import get_machine

#: The ``h100`` preset on its datasheet figures alone.
DATASHEET_H100 = dataclasses.replace(get_machine("h100"), calibration=())
