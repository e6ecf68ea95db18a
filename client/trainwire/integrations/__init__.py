"""Integrations of trainwire with other tools' plugin systems (each module is loaded by its tool)."""
