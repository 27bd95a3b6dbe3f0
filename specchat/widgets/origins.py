"""How a token's origin looks: one style per origin, shared by replies, the legend and the help."""

# A theme colour, and a cue that survives without colour.
STYLES = {
    "accepted": "$text-success underline",  # a draft the model agreed with
    "bonus": "$text-primary bold",  # the model's own token after every draft of a step was kept
    "correction": "$text-warning italic",  # the model's token where it refused a draft: quiet, read often
    "plain": "",  # decoded one token per step, no drafts
    "refused": "$text-error dim strike",  # drafts refused at a correction (teaching view only)
}
# In the Markdown view the Markdown owns the text's colour (a heading, highlighted code), so an origin
# is also a tint behind its characters, which survives any colour in front.
TINTS = {
    "accepted": "on $success-muted",
    "bonus": "on $primary-muted",
    "correction": "on $warning-muted",
    "plain": "",
    "refused": "",
}
CURSOR = "bold on $accent 40%"  # the token the step inspector shows
