"""Benchmarks of the engine: speculative decoding against plain decoding and against transformers'
`generate` on the same model (speculative.py, peers.py, prompts.py, report.py: `specchat bench`,
`specchat compare`)."""
