"""Figures and report.md from a scaling-study folder."""
