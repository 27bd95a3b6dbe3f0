"""specchat's chat app: talk to a model and watch what speculative decoding does at every step."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import on, work
from textual.app import App
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import ModalScreen
from textual.widgets import Footer, Header, Input

from engine import EngineError, Generation, find_spec
from specchat.messages import LoadFailed, LoadProgress, ModelReady, ProposerReady, ReplyDone, StepDone
from specchat.options import chosen_proposer
from specchat.session import ChatSession, chat_name, clamp_k, k_position, next_k
from specchat.settings import ChatRecord, Settings
from specchat.widgets.help import HelpScreen
from specchat.widgets.legend import Legend
from specchat.widgets.panel import SpecPanel, Stats
from specchat.widgets.prompt import PromptInput
from specchat.widgets.settings_screen import SettingsScreen
from specchat.widgets.transcript import Loading, ReplyView, Transcript

WELCOME = (
    "Ask anything. Each token of a reply shows where it came from (see the legend below): "
    "ctrl+p switches the proposer, + and - change how many tokens it drafts, ? explains it all."
)
NARROW = 96  # below this many columns the panel hides until asked for


class SpecChat(App):
    """The chat. The engine runs in one worker thread that posts a message per step."""

    CSS_PATH = "specchat.tcss"
    TITLE = "specchat"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "stop", "stop", priority=True),
        Binding("ctrl+p", "next_proposer", "proposer", priority=True),
        Binding("plus,equals_sign", "k(1)", "k+", key_display="+"),
        Binding("minus", "k(-1)", "k−", key_display="-"),
        Binding("ctrl+t", "teaching", "teaching", priority=True),
        Binding("ctrl+b", "panel", "panel", priority=True),
        Binding("ctrl+s", "settings", "settings", priority=True),
        Binding("ctrl+n", "new_chat", "new", priority=True),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("f1", "help", "help", priority=True, show=False),
        Binding("ctrl+q", "quit", "quit", priority=True, show=False),
    ]

    def __init__(self, session: ChatSession, settings: Settings, save: bool = True):
        super().__init__()
        self.session = session
        self.settings = settings
        self.save = save  # False: leave settings on disk as they are (tests)
        self.record = ChatRecord(model=session.label, system=settings.system)
        self.stats = Stats()
        self.proposer_name = "off"  # what the next step drafts with
        self.loading_proposer = ""  # a draft model or drafter loading in the background
        self.gen: Generation | None = None
        self.reply_id = 0
        self.reply: ReplyView | None = None
        self.panel_forced: bool | None = None  # ctrl+b's choice; None: by the terminal's width

    # ---- layout --------------------------------------------------------------------------------

    def compose(self):
        # Widgets kept by reference: a step that lands while the app closes updates them harmlessly.
        self.chat, self.panel, self.legend = Transcript(id="chat"), SpecPanel(id="panel"), Legend(id="legend")
        self.loading = Loading(id="loading")
        self.prompt = PromptInput(placeholder="loading the model…", id="prompt", disabled=True)
        yield Header()
        with Horizontal(id="main"):
            with self.chat:
                yield self.loading
            yield self.panel
        yield self.prompt
        yield self.legend
        yield Footer(compact=True)

    def on_mount(self) -> None:
        if self.settings.theme in self.available_themes:
            self.theme = self.settings.theme
        self.sub_title = self.session.label
        self.legend.show(self.settings.teaching)
        self.show_panel()
        self.load_model()

    def on_unmount(self) -> None:
        # Quitting mid-reply: the engine thread ends at its next step; what was written is kept.
        self.action_stop()
        self.end_reply("cancelled")

    def on_resize(self) -> None:
        self.fold_panel()

    def fold_panel(self) -> None:
        wide = self.size.width >= NARROW
        self.panel.display = wide if self.panel_forced is None else self.panel_forced

    def show_panel(self) -> None:
        self.panel.show(self.stats, self.proposer_name, self.settings.k, self.loading_proposer)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        # The chat screen's keys stay out of the help and settings screens' way.
        if isinstance(self.screen, ModalScreen):
            return False
        if action == "stop":
            return True if self.gen is not None else None  # None: shown, greyed out
        return True

    # ---- loading -------------------------------------------------------------------------------

    @work(thread=True, exit_on_error=False)
    def load_model(self) -> None:
        try:
            label = self.session.load(lambda text: self.post_message(LoadProgress("model", text)))
        except Exception as err:  # noqa: BLE001 - the worker would swallow it and leave "loading…" up
            self.post_message(LoadFailed("model", one_line(err)))
            return
        self.post_message(ModelReady(label))

    @on(LoadProgress)
    def load_progress(self, message: LoadProgress) -> None:
        if message.what == "model":
            self.loading.say(message.text.strip())
        else:
            self.loading_proposer = f"loading {message.what}… {message.text.strip()}"[:60]
            self.show_panel()

    @on(ModelReady)
    def model_ready(self, message: ModelReady) -> None:
        self.loading.remove()
        self.chat.add_note(WELCOME)
        self.sub_title = self.record.model = message.label
        prompt = self.prompt
        prompt.disabled = False
        prompt.placeholder = "type a message · enter sends · ? help"
        prompt.focus()
        names = self.session.proposer_names()
        self.choose_proposer(self.settings.proposer if self.settings.proposer in names else "n-gram")

    @on(LoadFailed)
    def load_failed(self, message: LoadFailed) -> None:
        if message.what == "model":
            self.loading.say(f"cannot load the model: {message.error}")
            self.loading.add_class("failed")
        else:
            self.loading_proposer = ""
            self.notify(f"cannot load {message.what}: {message.error}", severity="error", timeout=8)
            self.show_panel()

    @work(thread=True, exit_on_error=False)
    def load_proposer(self, name: str) -> None:
        try:
            proposer = self.session.proposer(
                name, self.settings.k, lambda text: self.post_message(LoadProgress(name, text))
            )
        except Exception as err:  # noqa: BLE001 - as for the model
            self.post_message(LoadFailed(name, one_line(err)))
            return
        self.post_message(ProposerReady(name, proposer))

    @on(ProposerReady)
    def proposer_ready(self, message: ProposerReady) -> None:
        self.loading_proposer = ""
        self.use_proposer(message.name)

    # ---- proposer and k ------------------------------------------------------------------------

    def choose_proposer(self, name: str) -> None:
        if self.session.needs_loading(name):
            if not self.loading_proposer:
                self.loading_proposer = f"loading {name}…"
                self.load_proposer(name)
            self.show_panel()
            return
        self.use_proposer(name)

    def use_proposer(self, name: str) -> None:
        """Draft with `name` from the next step on, in the reply being written too."""
        proposer = self.session.proposer(name, self.settings.k)
        self.proposer_name = self.settings.proposer = name
        self.settings.k = proposer.k if proposer else self.settings.k
        if self.gen is not None:
            self.gen.speculative = proposer
        self.save_settings()
        self.show_panel()

    def action_next_proposer(self) -> None:
        if self.session.model is None or self.loading_proposer:
            return
        names = self.session.proposer_names()
        self.choose_proposer(names[(names.index(self.proposer_name) + 1) % len(names)])

    def action_k(self, change: int) -> None:
        k = clamp_k(next_k(self.settings.k, change))
        if self.proposer_name != "off":
            k = self.session.proposer(self.proposer_name, k).k  # the next step reads it
        self.settings.k = k
        self.save_settings()
        self.show_panel()

    # ---- chatting ------------------------------------------------------------------------------

    @on(Input.Submitted, "#prompt")
    def submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text and not text.startswith("/") and self.gen is not None:
            # the message stays in the box, to be sent once the reply is done
            self.notify("a reply is being written: wait for it, or press esc to stop it")
            return
        event.input.clear()
        if text.startswith("/"):
            self.command(text)
        elif text:
            self.send(text)

    def send(self, text: str) -> None:
        """Start a reply to `text` (no reply is being written: `submitted` keeps the text till then)."""
        try:
            sampling = self.settings.sampling()
            self.record.messages.append({"role": "user", "content": text})
            ids = self.session.prompt_ids(self.record.history(), self.settings.system)
            proposer = (
                None
                if self.proposer_name == "off"
                else self.session.proposer(self.proposer_name, self.settings.k)
            )
            gen = self.session.stream(ids, sampling, proposer)
        except EngineError as err:
            self.record.messages.pop()
            self.notify(str(err), severity="error", timeout=8)
            return
        self.save_record()
        self.chat.add_user(text)
        self.reply = self.chat.add_reply(self.settings.teaching)
        self.stats.new_reply()
        self.reply_id += 1
        self.gen = gen
        self.run_engine(self.reply_id, gen)
        self.refresh_bindings()  # esc can stop something now
        self.show_panel()

    @work(thread=True, exit_on_error=False, group="engine")
    def run_engine(self, reply: int, gen: Generation) -> None:
        self.session.run_reply(reply, gen, self.post_message)

    @on(StepDone)
    def step_done(self, message: StepDone) -> None:
        if message.reply != self.reply_id or self.reply is None:
            return  # a step of a chat that was cleared
        self.reply.add_step(message.step, message.pieces, message.refused)
        self.stats.add(message.step)
        self.show_panel()

    @on(ReplyDone)
    def reply_done(self, message: ReplyDone) -> None:
        self.gen = None
        self.refresh_bindings()
        if message.reply == self.reply_id:
            self.end_reply(message.finished, message.error)

    def end_reply(self, finished: str, error: str = "") -> None:
        """Close the reply being written: into the record (unless it failed), and onto disk."""
        reply, m = self.reply, self.stats.reply
        if reply is None:
            return
        if finished == "error":
            self.record.messages.pop()
            reply.finish(f"error: {error}")
        else:
            summary = f"{m.tokens + 1} tokens · {m.mean_acceptance_length:.2f} tokens/step · "
            summary += f"{m.tokens_per_second:.1f} tok/s"
            self.record.messages.append(
                {"role": "assistant", "content": reply.text, "finished": finished, "stats": summary}
            )
            reply.finish(f"{'stopped' if finished == 'cancelled' else finished} · {summary}")
        self.reply = None
        self.save_record()

    def action_stop(self) -> None:
        if self.gen is not None:
            self.gen.cancel()

    def action_new_chat(self) -> None:
        self.action_stop()
        self.end_reply("cancelled")
        self.reply_id += 1  # steps still in flight are dropped
        self.record = ChatRecord(model=self.session.label, system=self.settings.system)
        self.chat.clear()
        self.stats.new_reply()
        self.show_panel()

    # ---- commands, screens, persistence --------------------------------------------------------

    def command(self, text: str) -> None:
        name, _, rest = text.partition(" ")
        rest = rest.strip()
        if name == "/export":
            try:
                path = self.record.export(Path(rest).expanduser() if rest else None)
            except OSError as err:
                self.notify(f"cannot write the chat to {err.filename or rest}: {err.strerror}", severity="error")
                return
            self.notify(f"chat written to {path}")
        elif name == "/new":
            self.action_new_chat()
        elif name == "/system":
            self.settings.system = self.record.system = rest
            self.save_settings()
            self.notify(f"system prompt: {rest}" if rest else "no system prompt")
        elif name == "/k" and rest.isdigit():
            self.action_k(int(rest) - k_position(self.settings.k))
            if self.settings.k != int(rest):  # out of range, or beyond what the drafter's block gives
                self.notify(f"k = {rest} is out of range here: k is {self.settings.k}", severity="warning")
        elif name == "/proposer" and rest in self.session.proposer_names():
            self.choose_proposer(rest)
        elif name == "/help":
            self.action_help()
        else:
            self.notify(
                f"unknown command {text!r}: /export [FILE], /new, /system TEXT, /k N, "
                f"/proposer {'|'.join(self.session.proposer_names())}, /help",
                severity="warning",
            )

    def action_teaching(self) -> None:
        self.settings.teaching = not self.settings.teaching
        self.chat.set_teaching(self.settings.teaching)
        self.legend.show(self.settings.teaching)
        self.save_settings()

    def action_panel(self) -> None:
        self.panel_forced = not self.panel.display
        self.fold_panel()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_settings(self) -> None:
        def done(settings: Settings | None) -> None:
            if settings is not None:
                self.settings = settings
                self.record.system = settings.system
                self.theme = settings.theme
                self.save_settings()

        self.push_screen(SettingsScreen(self.settings, sorted(self.available_themes)), done)

    def save_settings(self) -> None:
        if not self.save:
            return
        try:
            self.settings.save()
        except OSError as err:
            self.notify(f"cannot save the settings: {err.strerror}", severity="error")

    def save_record(self) -> None:
        try:
            self.record.save()
        except OSError as err:
            self.notify(f"cannot save the transcript: {err.strerror}", severity="error")


def one_line(err: Exception) -> str:
    """An error for the screen: the engine's own message, or the first line of anything else."""
    if isinstance(err, EngineError):
        return str(err)
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def make_app(session: ChatSession, settings: Settings | None = None, save: bool = True) -> SpecChat:
    """The app around a session: the real engine, or in tests a scripted one."""
    return SpecChat(session, settings or Settings.load(), save)


def settings_from(args) -> Settings:
    """Saved settings, with what the command line gave on top."""
    settings = Settings.load()
    for name in ("temperature", "top_k", "top_p", "seed", "max_tokens", "system"):
        if getattr(args, name, None) is not None:
            setattr(settings, name, getattr(args, name))
    chosen = chosen_proposer(args)
    if chosen is not None:
        settings.proposer = chat_name(find_spec(chosen))
    if args.speculate:
        settings.k = args.speculate
    if args.k is not None:
        settings.k = args.k
    settings.k = clamp_k(settings.k)
    settings.sampling()
    return settings


def main(args) -> int:
    """`specchat chat`: open the app on the model the options name."""
    make_app(ChatSession(args), settings_from(args)).run()
    return 0
