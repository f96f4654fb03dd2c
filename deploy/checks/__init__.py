"""The checks of deploy/, run by deploy/check: one module per deployment and the dashboard."""
