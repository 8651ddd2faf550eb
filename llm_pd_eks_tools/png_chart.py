"""A labelled horizontal bar chart written as a PNG with the standard library only (zlib + struct).

Why not matplotlib: it is not in the tooling set, and with its dependencies (numpy, pillow,
fonttools, kiwisolver, contourpy, pyparsing) it would add tens of MB to `make venv-dev` for one
chart. A PNG is a signature, an IHDR chunk, zlib-compressed scanlines (filter byte 0 each) in IDAT
and an IEND chunk, each chunk length + type + data + CRC-32 (PNG spec, W3C, sections 5 and 11.2):
that is all this module writes. Text uses a 5x7 bitmap font (upper-case, digits, a few signs).
"""

from __future__ import annotations

import struct
import zlib
from typing import Sequence

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
INK: Color = (40, 40, 40)
PALETTE: tuple[Color, ...] = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
)

# 5x7 glyphs, one string of 5 characters per row ('#' = ink).
_FONT = {
    "A": (" ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"),
    "B": ("#### ", "#   #", "#   #", "#### ", "#   #", "#   #", "#### "),
    "C": (" ### ", "#   #", "#    ", "#    ", "#    ", "#   #", " ### "),
    "D": ("#### ", "#   #", "#   #", "#   #", "#   #", "#   #", "#### "),
    "E": ("#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####"),
    "F": ("#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#    "),
    "G": (" ### ", "#   #", "#    ", "# ###", "#   #", "#   #", " ####"),
    "H": ("#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"),
    "I": (" ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "),
    "J": ("  ###", "   # ", "   # ", "   # ", "   # ", "#  # ", " ##  "),
    "K": ("#   #", "#  # ", "# #  ", "##   ", "# #  ", "#  # ", "#   #"),
    "L": ("#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####"),
    "M": ("#   #", "## ##", "# # #", "# # #", "#   #", "#   #", "#   #"),
    "N": ("#   #", "#   #", "##  #", "# # #", "#  ##", "#   #", "#   #"),
    "O": (" ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "),
    "P": ("#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    "),
    "Q": (" ### ", "#   #", "#   #", "#   #", "# # #", "#  # ", " ## #"),
    "R": ("#### ", "#   #", "#   #", "#### ", "# #  ", "#  # ", "#   #"),
    "S": (" ####", "#    ", "#    ", " ### ", "    #", "    #", "#### "),
    "T": ("#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "),
    "U": ("#   #", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "),
    "V": ("#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  "),
    "W": ("#   #", "#   #", "#   #", "# # #", "# # #", "# # #", " # # "),
    "X": ("#   #", "#   #", " # # ", "  #  ", " # # ", "#   #", "#   #"),
    "Y": ("#   #", "#   #", " # # ", "  #  ", "  #  ", "  #  ", "  #  "),
    "Z": ("#####", "    #", "   # ", "  #  ", " #   ", "#    ", "#####"),
    "0": (" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "),
    "1": ("  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "),
    "2": (" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"),
    "3": ("#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "),
    "4": ("   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "),
    "5": ("#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "),
    "6": ("  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "),
    "7": ("#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "),
    "8": (" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "),
    "9": (" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "),
    "$": ("  #  ", " ####", "# #  ", " ### ", "  # #", "#### ", "  #  "),
    ".": ("     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "),
    ",": ("     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "),
    "-": ("     ", "     ", "     ", "#####", "     ", "     ", "     "),
    ":": ("     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "),
    "/": ("    #", "    #", "   # ", "  #  ", " #   ", "#    ", "#    "),
    "%": ("##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##"),
    "(": ("   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "),
    ")": (" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "),
    " ": ("     ",) * 7,
}
GLYPH_W, GLYPH_H, SCALE = 6, 8, 2  # cell incl. one column/row of spacing; drawn at 2x


class Canvas:
    def __init__(self, width: int, height: int, background: Color = WHITE):
        self.width, self.height = width, height
        self.pixels = [bytearray(bytes(background) * width) for _ in range(height)]

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        for y in range(max(0, y0), min(self.height, y1)):
            row = self.pixels[y]
            for x in range(max(0, x0), min(self.width, x1)):
                row[3 * x : 3 * x + 3] = bytes(color)

    def text(self, x: int, y: int, text: str, color: Color = INK) -> None:
        for i, char in enumerate(text.upper()):
            glyph = _FONT.get(char, _FONT[" "])
            for gy, line in enumerate(glyph):
                for gx, cell in enumerate(line):
                    if cell == "#":
                        px, py = x + (i * GLYPH_W + gx) * SCALE, y + gy * SCALE
                        self.rect(px, py, px + SCALE, py + SCALE, color)

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(row) for row in self.pixels)  # filter type 0 (None) per scanline

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        signature = b"\x89PNG\r\n\x1a\n"
        return signature + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def text_width(text: str) -> int:
    return len(text) * GLYPH_W * SCALE


def bar_chart(title: str, bars: Sequence[tuple[str, float, str]], width: int = 900) -> bytes:
    """`bars` = (label, value, value text), one horizontal bar each, longest = the largest value."""
    row_h, top, pad = 34, 50, 16
    height = top + row_h * max(1, len(bars)) + pad
    canvas = Canvas(width, height)
    canvas.text(pad, pad, title)
    label_w = max([text_width(label) for label, _, _ in bars] or [0]) + 2 * pad
    value_w = max([text_width(shown) for _, _, shown in bars] or [0]) + pad
    scale_w = max(1, width - label_w - value_w - pad)
    biggest = max([v for _, v, _ in bars] or [0.0]) or 1.0
    for i, (label, value, shown) in enumerate(bars):
        y = top + i * row_h
        canvas.text(pad, y + 6, label)
        length = round(scale_w * max(0.0, value) / biggest)
        canvas.rect(label_w, y + 2, label_w + length, y + row_h - 6, PALETTE[i % len(PALETTE)])
        canvas.text(label_w + length + 8, y + 6, shown)
    return canvas.png()
