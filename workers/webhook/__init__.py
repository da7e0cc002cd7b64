"""The alert webhook receiver (`switchyard webhook`): Alertmanager and Grafana notifications in, sagas out;
what they do is decided in :mod:`switchyard.alerts`."""
