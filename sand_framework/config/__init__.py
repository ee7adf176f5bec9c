"""Recipes: load (``extends:``, overrides), validate (all problems at once), instantiate."""

from sand_framework.config.load import find_recipe, load_recipe, parse_overrides
from sand_framework.config.paramdoc import SpeedOnly
from sand_framework.config.schema import SECTIONS, SLOTS, Recipe
from sand_framework.config.validate import validate

__all__ = ["Recipe", "SECTIONS", "SLOTS", "SpeedOnly", "find_recipe", "load_recipe", "parse_overrides", "validate"]
