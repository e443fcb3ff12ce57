"""Notifications sent out of the daemon (budget alerts to a webhook)."""
