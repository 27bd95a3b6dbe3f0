"""A Static is redrawn without a layout of the screen only when its height cannot have changed."""

import asyncio

from textual.app import App
from textual.content import Content
from textual.widgets import Static

from specchat.widgets.redraw import redraw, unwrapped_lines


def test_lines_are_counted_only_when_none_wraps():
    assert unwrapped_lines(Content("one\ntwo"), 10) == 2
    assert unwrapped_lines(Content("a line of eleven"), 10) is None  # wider than the widget: it wraps
    assert unwrapped_lines(Content("a\tb"), 10) is None  # a tab's width depends on where it falls


class OneStatic(App):
    CSS = "Static { width: 20; }"

    def __init__(self, css: str = ""):
        super().__init__()
        self.extra_css = css

    def on_mount(self) -> None:
        if self.extra_css:
            self.static.set_styles(self.extra_css)

    def compose(self):
        self.static = Static(Content("first line\nsecond"))
        yield self.static


def after_redraw(new: Content, css: str = "") -> tuple[str, bool]:
    """What the Static shows after `redraw(new)` (with `css` on it), and whether a layout was asked for."""

    async def run():
        app = OneStatic(css)
        async with app.run_test() as pilot:
            await pilot.pause()
            redraw(app.static, new)
            return app.static.content.plain, app.static._layout_required

    return asyncio.run(run())


def test_as_many_unwrapped_lines_repaint_without_a_layout():
    assert after_redraw(Content("first\nsecond line")) == ("first\nsecond line", False)


def test_a_new_line_lays_out():
    assert after_redraw(Content("first\nsecond\nthird")) == ("first\nsecond\nthird", True)


def test_a_line_that_wraps_lays_out():
    assert after_redraw(Content("first line\nsecond, now wider than twenty")) == (
        "first line\nsecond, now wider than twenty",
        True,
    )


def test_a_new_style_on_the_same_text_repaints():
    plain, layout = after_redraw(Content.styled("first line\nsecond", "bold"))
    assert (plain, layout) == ("first line\nsecond", False)


def test_new_lines_within_a_minimum_height_repaint_without_a_layout():
    # the live area's block (live.py): its height holds while its lines stay within the minimum
    assert after_redraw(Content("first\nsecond\nthird"), "min-height: 4;") == ("first\nsecond\nthird", False)


def test_lines_beyond_a_minimum_height_lay_out():
    assert after_redraw(Content("1\n2\n3\n4\n5"), "min-height: 4;") == ("1\n2\n3\n4\n5", True)
