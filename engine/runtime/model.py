"""Model: a decoder with its KV pool, tokenizer and the steps the generation loop runs.

Every step runs T consecutive tokens of one sequence and samples, on the device, the token
that follows each of them: prefill (the prompt, sampling only after its last token), decode
(T = 1) and verify (T = k + 1) are the same operation. The host reads back only token ids.

On CUDA, steps of up to 16 tokens replay CUDA graphs (engine/runtime/step_graphs.py) unless the model was
made with eager=True; on the CPU, and for longer steps, they run eagerly. Both paths run the
same kernels: the torch reference on the CPU, the fused Triton ones on CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engine.errors import EngineError
from engine.limits import MAX_STEP, PAGE_SIZE
from engine.network.config import ModelConfig
from engine.network.decoder import Decoder, triton_available
from engine.runtime.kv_budget import check_context, default_context
from engine.runtime.kv_cache import PagePool, SeqCache
from engine.runtime.sampling import TOKEN, SamplingParams, probabilities, sample
from engine.runtime.step_graphs import StepGraphs
from engine.runtime.step_io import StepContext, StepOutput

# prompt lengths the warm-up prefills: one not a multiple of 16 and one that is (Triton compiles
# apart for each), short and long
PREFILL_WARM_UP = (2 * MAX_STEP + 3, 1040)


@dataclass
class Model:
    decoder: Decoder
    config: ModelConfig
    tokenizer: object | None = None
    name: str = "model"
    max_context: int = 4096
    state_layers: tuple[int, ...] = ()  # set while a DFlash drafter is attached
    eager: bool = False  # CUDA: run every step op by op (no CUDA graphs)
    # CUDA: compute every row of a 1..16-token step the same way whatever the step's length, so
    # bf16 output with speculation is plain decoding's bit for bit (decode steps get slower)
    batch_invariant: bool = False
    pool: PagePool = field(init=False)
    _stop_ids: tuple | None = field(default=None, init=False, repr=False)  # (tokenizer, its stop ids)

    def __post_init__(self):
        cfg = self.config
        p = next(self.decoder.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.backend = "triton" if self.device.type == "cuda" and triton_available() else "torch"
        num_pages = -(-(self.max_context + MAX_STEP) // PAGE_SIZE)
        graphed = self.backend == "triton" and not self.eager
        check_context(self.name, cfg, self.max_context, (num_pages + graphed) * PAGE_SIZE, self.dtype, self.device)
        self.pool = PagePool(  # graphs keep one page for themselves: the scratch their warm-ups write
            cfg.num_layers, num_pages + graphed, PAGE_SIZE, cfg.num_kv_heads, cfg.head_dim, self.dtype,
            self.device,
        )
        self.invariant_chunk = 0  # keys per attention split in batch-invariant steps
        if self.batch_invariant and self.backend == "triton":
            from engine.kernels.attention import invariant_chunk

            self.invariant_chunk = invariant_chunk(self.pool.num_pages * PAGE_SIZE, cfg.num_kv_heads)
        self.decoder.batch_invariant = self.invariant_chunk > 0
        self.graphs = None
        if graphed:
            self.graphs = StepGraphs(self)
        self._prefill_warmed: set[tuple[int, ...]] = set()  # state taps warm_prefill has run with

    def warm_up(
        self, sampling: SamplingParams, noise: int = TOKEN, state_layers: tuple[int, ...] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> int:
        """Compile the kernels and capture the CUDA graphs a reply with these sampling settings
        will use, now rather than at their first use mid-reply (nothing to do on the CPU or
        eagerly). state_layers: the hidden-state taps a DFlash drafter will ask for; progress:
        told "capturing CUDA graphs n/total" as each graph is captured."""
        if self.graphs is None:
            return 0
        self.warm_prefill()
        layers = self.state_layers if state_layers is None else state_layers
        return self.graphs.warm_up(sampling, noise, layers, progress)

    @torch.inference_mode()
    def warm_prefill(self) -> None:
        """Run prompts of PREFILL_WARM_UP lengths once, on a sequence given back at once: a
        prefill is the one step the graphs do not cover, and its kernels compile at their first
        use (a fresh chat's first reply came 0.9 s later than the next on the H200). Once per set
        of state taps (their adds are kernels of their own): later calls have nothing to compile."""
        taps = tuple(self.state_layers)
        if taps in self._prefill_warmed:
            return
        self._prefill_warmed.add(taps)
        for n in PREFILL_WARM_UP:
            if n > self.max_context:
                continue
            seq = self.new_sequence()
            try:
                self.step(seq, [0] * n, SamplingParams(temperature=0.0), last_only=True)  # greedy: no RNG drawn
            finally:
                seq.release()

    def new_sequence(self) -> SeqCache:
        return SeqCache(self.pool)

    def check_room(self, seq: SeqCache, n: int) -> None:
        if seq.length + n > self.max_context:
            raise EngineError(
                f"context full: {seq.length + n} tokens exceed this model's {self.max_context}-token "
                "context (shorten the prompt, start a new chat, or raise --max-context)"
            )

    @torch.inference_mode()
    def forward(self, seq: SeqCache, ids: torch.Tensor, causal: bool = True):
        """Run ids [T] after the sequence's cached positions, op by op; K/V land in the pool."""
        t = ids.shape[0]
        self.check_room(seq, t)
        start = seq.length
        seq.append(t)
        ctx = self.context(seq, start, t, causal)
        positions = torch.arange(start, start + t, device=self.device)
        return self.decoder(ids, positions, ctx, state_layers=self.state_layers)

    def context(self, seq: SeqCache, start: int, t: int, causal: bool = True) -> StepContext:
        """Where a step of t tokens at `start` writes its K/V and finds its context."""
        short = t <= MAX_STEP
        slots = None if self.backend == "triton" and short else seq.slots(0, start + t).to(self.device)
        if self.backend == "torch":
            pages = seq.pages
            run = pages == list(range(pages[0], pages[0] + len(pages)))  # K/V one view of the pool
            first_slot = pages[0] * self.pool.page_size if run else None
            return StepContext(self.pool, slots[start:], slots, causal, context_start=first_slot)
        pages = torch.tensor(seq.pages, dtype=torch.long).to(self.device, non_blocking=True)
        first = torch.tensor([start], dtype=torch.long).to(self.device, non_blocking=True)
        return StepContext(self.pool, None, slots, causal, "triton", pages, first, self.invariant_chunk)

    @torch.inference_mode()
    def step(
        self,
        seq: SeqCache,
        ids: list[int] | torch.Tensor,
        sampling: SamplingParams,
        last_only: bool = False,
        noise: int = TOKEN,
    ) -> StepOutput:
        """Run ids and sample the token after each (after the last only, for a prefill).

        ids may be a device tensor (drafts handed over on the device). With CUDA graphs the
        outputs are the graph's static buffers: read them before this model's next step."""
        if self.graphs is not None and 0 < len(ids) <= MAX_STEP:
            return self.graphs.step(seq, ids, sampling, last_only, noise)
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        start = seq.length
        out = self.forward(seq, ids)
        hidden, states = out if self.state_layers else (out, None)
        positions = torch.arange(start + 1, start + ids.shape[0] + 1, device=self.device)
        if last_only:
            hidden, positions = hidden[-1:], positions[-1:]
        logits = self.decoder.logits(hidden)
        return StepOutput(sample(logits, positions, sampling, noise), logits, states)

    @torch.inference_mode()
    def chain(self, seq: SeqCache, first: torch.Tensor, n: int, sampling: SamplingParams, noise: int = TOKEN
              ) -> StepOutput:
        """n one-token steps, each running the token the previous one sampled, starting from
        `first` ([1], on the device): tokens [n] and their logits [n, V], and with `state_layers`
        set their states [n, len(state_layers) * H]. The host only enqueues them (replays of one
        graph on CUDA); nothing is read back."""
        if self.graphs is not None:
            return self.graphs.chain(seq, first, n, sampling, noise)
        outs = []
        token = first
        for _ in range(n):
            outs.append(self.step(seq, token, sampling, last_only=True, noise=noise))
            token = outs[-1].tokens
        states = torch.cat([o.states for o in outs]) if self.state_layers else None
        return StepOutput(torch.cat([o.tokens for o in outs]), torch.cat([o.logits for o in outs]), states)

    def probabilities(self, logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
        return probabilities(logits, sampling)

    def encode_chat(self, messages: list[dict], system: str | None = None) -> list[int]:
        """Token ids of a conversation through the model's chat template, ready for the reply."""
        if self.tokenizer is None:
            raise EngineError("this model has no tokenizer")
        if system:
            messages = [{"role": "system", "content": system}, *messages]
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return list(ids)
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return self.tokenizer.encode(text)

    def stop_ids(self) -> list[int]:
        """The tokens that end a reply. Worked out once per tokenizer: get_vocab() builds the whole
        vocabulary as a dict (150,000 entries for Qwen, 0.1 s or more), and a chat asks at every reply."""
        tok = self.tokenizer
        if self._stop_ids is not None and self._stop_ids[0] is tok:
            return list(self._stop_ids[1])
        ids = set(self.config.eos_token_ids)
        if tok is not None and tok.eos_token_id is not None:
            ids.add(tok.eos_token_id)
        vocab = getattr(tok, "get_vocab", dict)() if tok is not None else {}
        for name in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
            if name in vocab:
                ids.add(tok.convert_tokens_to_ids(name))
        self._stop_ids = (tok, sorted(ids))
        return list(self._stop_ids[1])


def random_model(cfg: ModelConfig, device="cpu", dtype=torch.float32, seed: int = 0, std: float = 0.02,
                 **kw) -> Model:
    """A model with random weights: tests (any shape) and step benchmarks (speed ignores the values)."""
    torch.manual_seed(seed)
    with torch.device(device):
        decoder = Decoder(cfg)
    for name, p in decoder.named_parameters():
        if "norm" in name:
            torch.nn.init.normal_(p, 1.0, 0.1)
        else:
            torch.nn.init.normal_(p, 0.0, std)
    decoder.to(dtype).eval()
    kw.setdefault("max_context", default_context(cfg))  # as load_model's default: within the positions
    return Model(decoder, cfg, name=f"random-{cfg.model_type}", **kw)
