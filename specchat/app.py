"""specchat's chat app: talk to a model and watch what speculative decoding does at every step."""

from __future__ import annotations

import gc
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

from textual import on, work
from textual.app import App
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Header

from engine import EngineError, Generation, find_spec
from specchat.collector import FullPasses
from specchat.copying import last_code_block
from specchat.feed import StepFeed
from specchat.frames import SWITCH_S, FramePacer
from specchat.messages import LoadFailed, LoadProgress, ModelReady, ProposerReady, RaceDone, ReplyDone
from specchat.options import check_k_flags, chosen_proposer
from specchat.race import export_race, run_race
from specchat.session import ChatSession, chat_name, clamp_k, k_position, next_k
from specchat.settings import ChatRecord, Settings, data_dir
from specchat.stats_file import write_stats
from specchat.timeline import ReplyTimeline
from specchat.widgets.chats_screen import ChatsScreen
from specchat.widgets.help import HelpScreen
from specchat.widgets.inspector import StepInspector
from specchat.widgets.keys import KeyLine
from specchat.widgets.legend import Legend
from specchat.widgets.live import LiveArea
from specchat.widgets.loading import Loading
from specchat.widgets.panel import SpecPanel, Stats
from specchat.widgets.prompt import PromptInput
from specchat.widgets.race_screen import RaceScreen
from specchat.widgets.reply import ReplyView, TokenPicked
from specchat.widgets.settings_screen import SettingsScreen
from specchat.widgets.transcript import Transcript

WELCOME = (
    "Ask anything. Each token of a reply shows where it came from (see the legend below): "
    "ctrl+p switches the proposer, + and - change how many tokens it drafts, ? explains it all."
)
NARROW = 96  # below this many columns the panel hides until asked for
PANEL_S = 1 / 4  # how often the panel's figures follow them: slower than the reply, whose frames matter more
PAINT_WAIT_S = 1.0  # the longest the end of a reply waits to be painted (its blocks off the screen)
SAVE_EVERY = 1.0  # seconds between saves of a reply being written: a crash loses at most this much
# The chat screen's own actions: refused while help or settings is open (focus keys and quit pass).
CHAT_ACTIONS = {"stop", "interrupt", "next_proposer", "k", "teaching", "panel", "settings", "new_chat", "help",
                "copy_reply", "copy_code", "inspector", "move_cursor", "race", "chats", "markdown"}


class SpecChat(App):
    """The chat. The engine runs in one worker thread that puts each step into a StepFeed; the
    app takes what is new once per frame, and the panel follows at a slower, steady rate."""

    CSS_PATH = "specchat.tcss"
    TITLE = "specchat"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "stop", "stop", priority=True),
        Binding("ctrl+c", "interrupt", "stop", priority=True, show=False),  # as in llama-cli; quit is ctrl+q
        Binding("ctrl+p", "next_proposer", "proposer", priority=True),
        Binding("plus,equals_sign", "k(1)", "k+", key_display="+"),
        Binding("minus", "k(-1)", "k−", key_display="-"),
        Binding("ctrl+t", "teaching", "teaching", priority=True),
        Binding("f5", "markdown", "markdown", priority=True),
        Binding("ctrl+b", "panel", "panel", priority=True),
        Binding("ctrl+s", "settings", "settings", priority=True),
        Binding("ctrl+n", "new_chat", "new", priority=True),
        Binding("ctrl+o", "chats", "chats", priority=True),
        Binding("f2", "copy_reply", "copy"),
        Binding("f3", "copy_code", "copy code"),
        Binding("f4", "inspector", "inspect", priority=True),
        Binding("alt+left", "move_cursor(-1)", "token ←", priority=True, show=False),
        Binding("alt+right", "move_cursor(1)", "token →", priority=True, show=False),
        Binding("ctrl+r", "race", "race", priority=True),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("f1", "help", "help", priority=True, show=False),
        Binding("ctrl+q", "quit", "quit", priority=True, show=False),
        Binding("ctrl+q", "leave", "quit", priority=True),  # in the footer once the model failed to load
    ]

    def __init__(
        self, session: ChatSession, settings: Settings, save: bool = True, this_run_only: dict | None = None,
        resume: bool = False,
    ):
        super().__init__()
        self.session = session
        self.settings = settings
        self.save = save  # False: leave settings on disk as they are (tests)
        self.this_run_only = this_run_only or {}  # settings the command line gave: never saved
        self.resume = resume  # reopen the last chat once the model is ready
        self.load_error = ""  # why the model did not load: the exit status says so too
        self.queued: list[str] = []  # messages sent while a reply was written, in order
        self.record = ChatRecord(model=session.label, system=settings.system)
        self.stats = Stats()
        self.proposer_name = "off"  # what the next step drafts with
        self.loading_proposer = ""  # a draft model or drafter loading in the background
        self.gen: Generation | None = None  # the reply's engine run, until the reply is over on screen
        self.ending: tuple[str, str] | None = None  # how the engine ended the reply, till it is painted
        self.feed: StepFeed | None = None  # the steps of the reply being written
        self.frames = None  # the timer of the next frame that shows them
        self.pacer: FramePacer | None = None  # how far apart those frames are, while a reply streams
        self.full_passes = FullPasses()  # the collector's full passes held off while a reply streams
        self.switch_s = sys.getswitchinterval()
        self.panel_at = 0.0  # when the panel was last redrawn
        self.panel_stale = False  # steps have come since
        self.clock = time.perf_counter  # of the rate the user saw (a test fixes it for a stable screen)
        self.reply_id = 0
        self.timeline = ReplyTimeline()  # where the latest reply's time went (specchat bench chat prints it)
        self.reply: ReplyView | None = None
        self.panel_forced: bool | None = None  # ctrl+b's choice; None: by the terminal's width
        self.inspecting = False  # the step inspector (f4): steps keep their verify numbers
        self.inspected: ReplyView | None = None  # the reply whose token the inspector shows
        self.racing: threading.Event | None = None  # set: stop the race (/compare) running now

    # ---- layout --------------------------------------------------------------------------------

    def compose(self):
        # Widgets kept by reference: a step that lands while the app closes updates them harmlessly.
        self.chat, self.panel, self.legend = Transcript(id="chat"), SpecPanel(id="panel"), Legend(id="legend")
        self.loading = Loading(id="loading")
        self.live = LiveArea(id="live")  # the end of the reply being written, out of the chat's scroll
        self.prompt = PromptInput(placeholder="loading the model…", id="prompt", disabled=True)
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="conversation"):
                with self.chat:
                    yield self.loading
                yield self.live
            yield self.panel
        self.inspector = StepInspector(id="inspector")
        self.inspector.display = False
        yield self.inspector
        yield self.prompt
        yield self.legend
        yield KeyLine(id="keys")  # the footer, folded when narrow

    def on_mount(self) -> None:
        if self.settings.theme in self.available_themes:
            self.theme = self.settings.theme
        self.sub_title = self.session.label
        self.legend.show(self.settings.teaching, self.settings.markdown)
        self.show_panel()
        self.set_interval(SAVE_EVERY, self.save_unfinished)
        try:  # graphs are captured at load for the settings replies will use
            self.session.sampling = self.settings.sampling()
        except EngineError:
            pass  # a bad saved value: the settings screen says so; the defaults are warmed meanwhile
        self.load_model()

    def on_unmount(self) -> None:
        # Quitting mid-reply: the engine thread ends at its next step; what was written is kept.
        self.action_stop()
        # Messages still queued behind it are kept with the chat, marked unsent: reopening the chat
        # puts them back in the box (sending them by themselves after quit would surprise more).
        self.record.unsent, self.queued = self.queued, []
        self.close_reply()
        if self.record.unsent:
            self.save_record()

    def on_resize(self) -> None:
        self.fold_panel()

    def fold_panel(self) -> None:
        wide = self.size.width >= NARROW
        self.panel.display = wide if self.panel_forced is None else self.panel_forced

    def show_panel(self) -> None:
        self.panel_at, self.panel_stale = time.perf_counter(), False
        self.panel.show(self.stats, self.proposer_name, self.settings.k, self.loading_proposer)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action in CHAT_ACTIONS and isinstance(self.screen, ModalScreen):
            return False  # the chat's keys stay out of the help and settings screens' way
        if action in ("quit", "leave"):
            return (action == "leave") == bool(self.load_error)
        if action == "stop":
            return True if self.gen is not None or self.racing is not None else None  # None: shown, greyed out
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
        # What is loaded by now (the model, the libraries, the app's widgets) lives as long as the
        # app: left out of the collector's full passes, which otherwise walk it all and stall a
        # frame for 100 ms and more every second or so while a reply streams.
        gc.freeze()
        self.loading.remove()
        self.chat.add_note(WELCOME)
        self.sub_title = self.record.model = message.label
        prompt = self.prompt
        prompt.disabled = False
        prompt.placeholder = "type a message · enter sends · ? help"
        prompt.focus()
        if self.this_run_only:
            self.chat.add_note("for this run only (from the command line): " + described(self.this_run_only))
        names = self.session.proposer_names()
        self.choose_proposer(self.settings.proposer if self.settings.proposer in names else "n-gram")
        if self.resume:
            self.resume_last()

    @on(LoadFailed)
    def load_failed(self, message: LoadFailed) -> None:
        if message.what == "model":
            self.load_error = message.error
            self.loading.say(f"cannot load the model: {message.error}")
            self.loading.add_class("failed")
            self.prompt.placeholder = "the model did not load · ctrl+q quits"
            self.refresh_bindings()
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
        name = names[(names.index(self.proposer_name) + 1) % len(names)]
        self.choose_proposer(name)
        if name == "off" and (gone := self.session.missing_proposers()):  # the cycle came round
            self.notify("not in the cycle: " + " · ".join(f"{label}: {why}" for label, why in gone.items()))

    def action_k(self, change: int) -> None:
        k = clamp_k(next_k(self.settings.k, change))
        if self.proposer_name != "off":
            k = self.session.proposer(self.proposer_name, k).k  # the next step reads it
        self.settings.k = k
        self.save_settings()
        self.show_panel()

    # ---- chatting ------------------------------------------------------------------------------

    @on(PromptInput.Submitted, "#prompt")
    def submitted(self, event: PromptInput.Submitted) -> None:
        text = event.value.strip()
        event.input.clear()
        if text and not text.startswith("/") and (self.gen is not None or self.racing is not None or self.queued):
            self.queued.append(text)
            self.notify(f"queued ({len(self.queued)}): sent when the reply being written ends · esc stops it")
            return
        if text.startswith("/"):
            self.command(text)
        elif text:
            self.send(text)

    def send(self, text: str) -> None:
        """Start a reply to `text` (no reply is being written: `submitted` keeps the text till then)."""
        timeline = ReplyTimeline.begin()
        try:
            sampling = self.session.sampling = self.settings.sampling()
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
        self.reply = self.chat.add_reply(self.settings.teaching, self.settings.markdown, self.live)
        self.reply.inspecting = self.inspecting
        if self.inspecting and (self.inspected is None or not self.inspected.is_attached):
            self.inspected = self.reply
        self.stats.new_reply(started=self.clock())
        self.timeline = timeline
        self.reply_id += 1
        self.gen = gen
        gen.inspect = self.inspecting
        self.feed = StepFeed(self.reply_id, self.session.detokenizer())
        self.start_frames()
        self.run_engine(gen, self.feed)
        self.refresh_bindings()  # esc can stop something now
        self.show_panel()

    @work(thread=True, exit_on_error=False, group="engine")
    def run_engine(self, gen: Generation, feed: StepFeed) -> None:
        self.session.run_reply(gen, feed, self.post_message)

    def start_frames(self) -> None:
        """Draw the reply's new steps frame by frame; the engine thread gets the GIL back sooner.
        A frame's steps are painted at the screen's next refresh: the next frame is timed after
        that, so the pause after a frame counts what painting it cost (a layout, the chat)."""
        sys.setswitchinterval(SWITCH_S)
        self.full_passes.hold()
        pacer = self.pacer = FramePacer()

        def frame() -> None:
            self.show_steps()
            self.call_after_refresh(painted)

        def painted() -> None:
            if self.pacer is pacer:  # still this reply's frames (stop_frames clears it)
                self.frames = self.set_timer(pacer.next_frame_s(), frame)

        self.frames = self.set_timer(pacer.fastest, frame)

    def show_steps(self, panel: bool = True) -> None:
        """Every step since the last frame onto the screen at once; the panel at its own pace
        (unless not `panel`)."""
        if self.feed is None or self.reply is None:
            return
        shown = self.feed.take()
        if shown:
            self.timeline.frames += 1
            self.reply.add_steps(shown)
            for s in shown:
                self.stats.add(s.step)
            self.stats.shown(self.clock())
            self.panel_stale = True
        if panel and self.panel_stale and time.perf_counter() - self.panel_at >= PANEL_S:
            self.show_panel()

    def stop_frames(self) -> None:
        if self.pacer is not None:
            self.frames.stop()
            sys.setswitchinterval(self.switch_s)
        self.frames = self.pacer = self.feed = None

    @on(ReplyDone)
    def reply_done(self, message: ReplyDone) -> None:
        """The engine thread is done: its last steps go on screen in the live area now; the reply
        is closed (Markdown view, record, save) once they are painted, so none of that delays them."""
        if message.reply != self.reply_id or self.reply is None:  # ended already (a new chat)
            self.engine_done(self.gen)
            return
        feed, line = self.feed, self.timeline
        if feed is not None:
            for name, at in (("engine began", feed.began), ("first step", feed.first_at), ("last step", feed.last_at)):
                if at is not None:
                    line.mark(name, at)
        line.mark("end handled")
        self.show_steps(panel=False)  # the panel's last figures once these steps are painted
        self.stop_frames()
        self.ending = (message.finished, message.error)
        self.call_after_refresh(self.reply_seen, self.reply_id, self.gen)

    def reply_seen(self, reply_id: int, gen: Generation | None, since: float | None = None) -> None:
        """The reply's last token is on the screen: note how fast it came, then close the reply."""
        if reply_id == self.reply_id and self.ending is not None:  # not ended meanwhile (a new chat)
            since = time.perf_counter() if since is None else since
            painted = self.reply.painted(above=self.chat.is_vertical_scroll_end)
            if not painted and time.perf_counter() - since < PAINT_WAIT_S:
                # Not yet: a refresh can come before the screen has heard of the last block's
                # change, and blocks mounted in the chat are laid out once they are mounted.
                self.call_after_refresh(self.reply_seen, reply_id, gen, since)
                return
            finished, error = self.ending
            if finished != "error":
                self.stats.shown(self.clock(), final=True)
                self.timeline.end()
            self.end_reply(finished, error, seen=finished != "error")
            self.show_panel()
        self.engine_done(gen)

    def engine_done(self, gen: Generation | None) -> None:
        """The reply of `gen` is over: esc has nothing to stop, and a queued message goes out."""
        if self.gen is gen:
            self.gen = None
            self.refresh_bindings()
        if self.queued and self.gen is None and self.reply is None:
            self.send(self.queued.pop(0))

    def end_reply(self, finished: str, error: str = "", seen: bool = False) -> None:
        """Close the reply being written: into the record (unless it failed), and onto disk;
        `seen`: its status says how fast it came on screen."""
        self.show_steps()
        self.stop_frames()
        self.ending = None
        reply, m = self.reply, self.stats.reply
        if reply is None:
            return
        if finished == "error":
            self.record.messages.pop()
            reply.finish(f"error: {error}")
        else:
            summary = f"{m.tokens + 1} tokens · {m.mean_acceptance_length:.2f} tokens/step · "
            summary += f"decode {m.tokens_per_second:.1f} tok/s"
            self.record.messages.append(
                {"role": "assistant", "content": reply.text, "finished": finished, "stats": summary}
            )
            status = f"{'stopped' if finished == 'cancelled' else finished} · {summary}"
            reply.finish(f"{status} · {seen_summary(self.stats)}" if seen else status)
        self.reply = None
        self.save_record()
        self.full_passes.release()  # after the reply's end is painted (reply_seen): a full pass may come now

    def close_reply(self) -> None:
        """End the reply now (a new chat, quitting): as it finished if its end is only waiting to be
        painted, else as stopped."""
        self.end_reply(*(self.ending or ("cancelled", "")))

    def action_leave(self) -> None:
        self.exit(return_code=1)  # a chat whose model never loaded is a failure

    def save_unfinished(self) -> None:
        """Save the reply being written as it stands, marked unfinished (a killed app keeps it)."""
        if self.reply is not None and self.reply.text:
            self.save_record({"role": "assistant", "content": self.reply.text, "finished": "unfinished"})

    def action_stop(self) -> None:
        if self.gen is not None:
            self.gen.cancel()
        if self.racing is not None:
            self.racing.set()

    def action_interrupt(self) -> None:
        """ctrl+c: stop the reply being written; with none, copy what is selected in the box."""
        if self.gen is not None:
            self.action_stop()
        elif self.prompt.selected_text:
            self.copy_to_clipboard(self.prompt.selected_text)
        else:
            self.notify("no reply to stop · ctrl+q quits")

    def action_copy_reply(self) -> None:
        """Put the last reply's text (as written so far) on the clipboard."""
        replies = self.query(ReplyView)
        if not replies or not replies.last().text:
            self.notify("no reply to copy yet", severity="warning")
            return
        self.copy_to_clipboard(replies.last().text)
        self.notify("reply copied")

    def action_copy_code(self) -> None:
        """Put the last reply's last code block on the clipboard."""
        replies = self.query(ReplyView)
        code = last_code_block(replies.last().text) if replies else None
        if code is None:
            self.notify("no code block in the last reply", severity="warning")
            return
        self.copy_to_clipboard(code)
        self.notify(f"code block copied ({len(code.splitlines())} lines)")

    def action_new_chat(self) -> None:
        if self.queued:  # not sent into the new chat: back into the box, to send or to clear
            self.prompt.value, self.queued = " ".join(self.queued), []
        self.action_stop()
        self.close_reply()
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
            except OSError as err:  # named by what was asked for, not the temporary file written first
                self.notify(f"cannot write the chat to {rest or 'the exports folder'}: {err.strerror}",
                            severity="error")
                return
            self.notify(f"chat written to {path}")
        elif name == "/compare":
            self.action_race()
        elif name == "/stats":
            self.export_stats(rest)
        elif name == "/new":
            self.action_new_chat()
        elif name == "/resume":
            self.resume_last()
        elif name == "/chats":
            self.action_chats()
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
                f"unknown command {text!r}: /export [FILE], /stats [FILE], /compare, /new, /resume, /chats, /system TEXT, /k N, "
                f"/proposer {'|'.join(self.session.proposer_names())}, /help",
                severity="warning",
            )

    def export_stats(self, rest: str) -> None:
        """/stats [FILE]: the reply's and the session's figures as FILE.json and FILE.csv."""
        path = Path(rest).expanduser() if rest else data_dir() / "exports" / f"{self.record.id}-stats"
        about = {"model": self.session.label, "proposer": self.proposer_name, "k": self.settings.k}
        try:
            json_path, csv_path = write_stats(path, {"reply": self.stats.reply, "session": self.stats.session}, about)
        except EngineError as err:
            self.notify(str(err), severity="error")
            return
        self.notify(f"figures written to {json_path} and {csv_path.name}")

    # ---- the step inspector ------------------------------------------------------------------------

    def action_inspector(self) -> None:
        """f2: keep each step's verify numbers from now on, and show the step under the cursor."""
        self.inspecting = not self.inspecting
        if self.gen is not None:
            self.gen.inspect = self.inspecting  # read at the reply's next step
        self.inspector.display = self.inspecting
        if self.inspected is None or not self.inspected.is_attached:
            self.inspected = self.reply
        if self.inspected is not None and self.inspected.cursor is None and self.inspected.pieces:
            self.inspected.cursor = len(self.inspected.pieces) - 1
        for reply in self.chat.query(ReplyView):
            reply.set_cursor(self.inspecting, reply.cursor if reply is self.inspected else None)
        self.show_inspected()

    def action_move_cursor(self, change: int) -> None:
        reply = self.inspected
        if not self.inspecting or reply is None or not reply.pieces:
            return
        at = reply.cursor if reply.cursor is not None else len(reply.pieces)
        reply.set_cursor(True, max(0, min(len(reply.pieces) - 1, at + change)))
        self.show_inspected()

    @on(TokenPicked)
    def token_picked(self, message: TokenPicked) -> None:
        if self.inspected is not None and self.inspected is not message.reply and self.inspected.is_attached:
            self.inspected.set_cursor(True, None)
        self.inspected = message.reply
        message.reply.set_cursor(True, message.index)
        self.show_inspected()

    def show_inspected(self) -> None:
        reply = self.inspected
        if not self.inspecting:
            return
        if reply is None or reply.cursor is None or reply.cursor >= len(reply.steps):
            self.inspector.show_step(None, "", self.session.decode, None)
            return
        piece = reply.pieces[reply.cursor][0]
        self.inspector.show_step(reply.steps[reply.cursor], piece, self.session.decode, self.stats.plain_step_s)

    # ---- the race (/compare) -----------------------------------------------------------------------

    def action_race(self) -> None:
        """Run the last prompt through plain decoding and every proposer ready now, one by one."""
        users = [i for i, m in enumerate(self.record.messages) if m["role"] == "user"]
        if not users:
            self.notify("nothing to race yet: send a message first", severity="warning")
            return
        if self.gen is not None or self.racing is not None:
            self.notify("a reply or a race is running: esc stops it first", severity="warning")
            return
        history = self.record.history()[: users[-1] + 1]
        try:
            ids = self.session.prompt_ids(history, self.settings.system)
        except EngineError as err:
            self.notify(str(err), severity="error")
            return
        names = [n for n in self.session.proposer_names() if n != "off" and not self.session.needs_loading(n)]
        entrants = [("off", 0), *((n, self.settings.k) for n in names)]
        self.racing = threading.Event()
        self.refresh_bindings()
        self.notify(f"racing plain decoding{''.join(', ' + n for n in names)} on your last prompt (esc stops)")
        self.run_race(ids, self.settings.sampling(), entrants, self.racing)

    @work(thread=True, exit_on_error=False, group="engine")
    def run_race(self, ids, sampling, entrants, cancelled: threading.Event) -> None:
        self.post_message(RaceDone(run_race(self.session, ids, sampling, entrants, cancelled)))

    @on(RaceDone)
    def race_done(self, message: RaceDone) -> None:
        self.racing = None
        self.refresh_bindings()
        self.push_screen(RaceScreen(message.race, self.export_race))
        if self.queued:  # sent while the race ran
            self.send(self.queued.pop(0))

    def export_race(self, race) -> None:
        path = data_dir() / "exports" / f"{self.record.id}-race"
        try:
            json_path, csv_path = export_race(path, race)
        except EngineError as err:
            self.notify(str(err), severity="error")
            return
        self.notify(f"race written to {json_path} and {csv_path.name}")

    def action_teaching(self) -> None:
        self.settings.teaching = not self.settings.teaching
        self.chat.set_teaching(self.settings.teaching)
        self.legend.show(self.settings.teaching, self.settings.markdown)
        self.save_settings()

    def action_markdown(self) -> None:
        """f5: finished replies as Markdown or as raw text."""
        self.settings.markdown = not self.settings.markdown
        self.chat.set_markdown(self.settings.markdown)
        self.legend.show(self.settings.teaching, self.settings.markdown)
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
            self.settings.save(self.this_run_only)
        except OSError as err:
            self.notify(f"cannot save the settings: {err.strerror}", severity="error")

    def save_record(self, unfinished: dict | None = None) -> None:
        try:
            self.record.save(unfinished)
        except OSError as err:
            self.notify(f"cannot save the transcript: {err.strerror}", severity="error")

    def resume_last(self) -> None:
        """Reopen the chat saved last (not this one), to read and to go on with."""
        last = ChatRecord.latest(skip=self.record.id)
        if last is None:
            self.notify("no saved chat to reopen", severity="warning")
            return
        self.reopen(last)

    def action_chats(self) -> None:
        """Browse the saved chats; the one picked is reopened."""
        self.push_screen(ChatsScreen(skip=self.record.id), lambda record: record and self.reopen(record))

    def reopen(self, record: ChatRecord) -> None:
        """Show a saved chat in place of this one, to read and to go on with."""
        if self.gen is not None:
            self.notify("a reply is being written: stop it (esc) before reopening a chat", severity="warning")
            return
        self.action_new_chat()
        self.record = record
        for m in record.messages:
            if m["role"] == "user":
                self.chat.add_user(m["content"])
                continue
            # a saved reply has no steps left to colour: its text shows as plain decoding's
            reply = self.chat.add_reply(self.settings.teaching, self.settings.markdown)
            reply.add([(m["content"], "plain")])
            status = m.get("finished", "")
            reply.finish(" · ".join(x for x in ("stopped" if status == "cancelled" else status, m.get("stats")) if x))
        self.chat.add_note(f"reopened the chat of {record.started}")
        if record.unsent:  # queued when the chat closed: back in the box, to send or to clear
            self.prompt.value, record.unsent = "\n".join(record.unsent), []
            self.chat.add_note("the messages not sent before the chat closed are back in the box")
            self.save_record()


def seen_summary(stats: Stats) -> str:
    """The rate the user saw, and where the time went that the engine's decode rate leaves out."""
    m, seen = stats.reply, stats.seen_s
    other = max(seen - m.prefill_s - m.decode_s, 0.0)
    return (
        f"on screen {stats.emitted / seen if seen else 0:.1f} tok/s over {seen:.2f} s from enter "
        f"(prefill {m.prefill_s:.2f} s, decoding {m.decode_s:.2f} s, display and host {other:.2f} s)"
    )


def one_line(err: Exception) -> str:
    """An error for the screen: the engine's own message, or the first line of anything else."""
    if isinstance(err, EngineError):
        return str(err)
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def described(values: dict) -> str:
    return " · ".join(f"{name.replace('_', ' ')} {value!r}" for name, value in values.items())


def make_app(session: ChatSession, settings: Settings | None = None, save: bool = True, **kw) -> SpecChat:
    """The app around a session: the real engine, or in tests a scripted one."""
    return SpecChat(session, settings or Settings.load(), save, **kw)


def flags_from(args) -> dict:
    """The settings the command line gives (they hold for this run and are not saved); a k out of
    range, or one that nothing would use, is refused."""
    flags = {
        name: getattr(args, name)
        for name in ("temperature", "top_k", "top_p", "seed", "max_tokens", "system")
        if getattr(args, name, None) is not None
    }
    check_k_flags(args)
    chosen = chosen_proposer(args)
    if chosen is not None:
        flags["proposer"] = chat_name(find_spec(chosen))
    if args.speculate is not None:
        flags["k"] = args.speculate
    if args.k is not None:
        flags["k"] = args.k
    return flags


def settings_from(args) -> tuple[Settings, dict]:
    """Saved settings with what the command line gave on top, and what it gave."""
    settings, flags = Settings.load(), flags_from(args)
    for name, value in flags.items():
        setattr(settings, name, value)
    settings.k = clamp_k(settings.k)  # a hand-edited settings file
    settings.sampling()
    return settings, flags


def main(args) -> int:
    """`specchat chat`: open the app on the model the options name."""
    settings, flags = settings_from(args)
    app = make_app(ChatSession(args), settings, this_run_only=flags, resume=args.resume)
    app.run()
    if app.load_error:
        print(f"specchat: cannot load the model: {app.load_error}", file=sys.stderr)
    if app.record.unsent:
        print(f"specchat: {len(app.record.unsent)} queued message(s) not sent, kept with the chat: "
              "specchat --resume puts them back in the box", file=sys.stderr)
    return app.return_code or 0
