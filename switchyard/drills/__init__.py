"""DR drills: the canary application, its own corner of the estate, and the schedules that fire them
(the drill's contract with its workflow — model and verdict — is in ``switchyard.sagas``)."""
