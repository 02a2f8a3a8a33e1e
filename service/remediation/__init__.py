"""Remediation: the controller that acts on level-3 alerts, and the hooks it acts through."""
