"""The keys of the chat, folded onto as many lines as the terminal's width needs (Textual's Footer
keeps one line and cuts what does not fit, which on a narrow terminal is most of them)."""

from __future__ import annotations

from textual.content import Content

from specchat.widgets.folded import Folded


def key_entry(key: str, description: str, enabled: bool) -> Content:
    if not enabled:
        return Content.styled(f"{key} {description}", "$text-disabled")
    return Content.assemble((key, "$text-accent bold"), " ", description)


class KeyLine(Folded):
    """The shown bindings of the screen it is on, redrawn when they change (as the Footer is)."""

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.show_keys()

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen) -> None:
        if screen is self.screen:
            self.show_keys()

    def show_keys(self) -> None:
        entries, actions = [], set()
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in actions:  # one entry per action, as in the Footer
                actions.add(binding.action)
                entries.append(key_entry(self.app.get_key_display(binding), binding.description, enabled))
        self.set_entries(entries)
