"""Migrations of the example app."""
