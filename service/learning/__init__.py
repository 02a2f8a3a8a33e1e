"""How the models learn from what the rounds saw: the model registry and the roles a model plays
(live or shadow), the shadow scores and the scoreboard that compares them, promotion, the labels
raised from hard findings (auto-labelling), and operators' verdicts on alerts."""
