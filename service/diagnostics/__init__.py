"""Active diagnostics on a node (issue 32): where a suite runs (sites), what its runs left
(runs), and the return-to-service gate that releases a drained node only after they pass."""
