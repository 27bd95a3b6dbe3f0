"""The engine's fixed sizes, each defined once.

A step is the unit the runtime captures as a CUDA graph and the product kernels are tuned for:
decode (1 token), verify (the last token and its drafts) and the draft chain all run steps of at
most MAX_STEP tokens; longer runs (prefill) take the general path. So k, the drafts per verify
step, is at most MAX_STEP - 1.
"""

MAX_STEP = 16  # longest verify step: the last token and up to 15 drafts
MAX_K = MAX_STEP - 1  # drafts per step
PAGE_SIZE = 16  # tokens per KV cache page
