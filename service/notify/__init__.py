"""Notification: the Alertmanager-shaped pipeline from alert state to receivers
(route, group, inhibit, silence, dedup against the notification log, rate-limit, send with
retries, record)."""

from service.notify.message import AlertRef, Delivery, Message, Notifier

__all__ = ["AlertRef", "Delivery", "Message", "Notifier"]
