//! An incremental line splitter with a length cap: fed bytes in chunks of any size, it yields
//! exactly the lines of the whole stream, in bounded memory.

/// One item out of the splitter.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// A complete line (1-based number; without `\n`, and without a `\r` before it).
    Text(usize, &'a [u8]),
    /// A line longer than the cap: reported once, its bytes dropped. `len` is its full length.
    TooLong(usize, usize),
    /// With [`LineSplitter::feed_sparse`]: complete lines that do not contain the needle, raw
    /// (newlines and `\r` included). Line numbers still count them.
    Gap(&'a [u8]),
}

/// Splits a byte stream into lines. Only the unfinished tail of a line is buffered, and never
/// more than `max_len` bytes of it.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
    max_len: usize,
    line_no: usize,
    /// Bytes of the current line seen so far, when it is over the cap (then `buf` is empty).
    overflow: Option<usize>,
}

impl LineSplitter {
    /// A splitter for lines of at most `max_len` bytes.
    pub(crate) fn new(max_len: usize) -> LineSplitter {
        LineSplitter {
            buf: Vec::new(),
            max_len,
            line_no: 0,
            overflow: None,
        }
    }

    /// The number of the last line handed out.
    #[cfg(test)]
    pub(crate) fn line_no(&self) -> usize {
        self.line_no
    }

    /// Feeds a chunk; calls `f` for each line it completes.
    pub(crate) fn feed(&mut self, mut chunk: &[u8], f: &mut dyn FnMut(Line<'_>)) {
        while !chunk.is_empty() {
            let Some(nl) = memchr::memchr(b'\n', chunk) else {
                self.push_partial(chunk);
                return;
            };
            let (head, rest) = (&chunk[..nl], &chunk[nl + 1..]);
            chunk = rest;
            self.line_no += 1;
            if let Some(seen) = self.overflow.take() {
                f(Line::TooLong(self.line_no, seen + head.len()));
            } else if self.buf.is_empty() {
                // The common case: the whole line is in this chunk; no copy.
                if head.len() > self.max_len {
                    f(Line::TooLong(self.line_no, head.len()));
                } else {
                    f(Line::Text(self.line_no, strip_cr(head)));
                }
            } else if self.buf.len() + head.len() > self.max_len {
                let len = self.buf.len() + head.len();
                self.buf.clear();
                f(Line::TooLong(self.line_no, len));
            } else {
                self.buf.extend_from_slice(head);
                let line = std::mem::take(&mut self.buf);
                f(Line::Text(self.line_no, strip_cr(&line)));
                self.buf = line;
                self.buf.clear();
            }
        }
    }

    /// Like [`LineSplitter::feed`], but hands out as [`Line::Text`] only the lines that contain
    /// one of `needles` (and any line that had to be joined across chunks); the other complete
    /// lines come as [`Line::Gap`] runs. Finding the needles and counting newlines are SIMD
    /// searches, each needle's moving forward only, so a stream with few interesting lines is
    /// read at close to memory speed. The line numbers and the events are exactly those of
    /// [`LineSplitter::feed`].
    pub(crate) fn feed_sparse(
        &mut self,
        chunk: &[u8],
        needles: &[memchr::memmem::Finder<'_>],
        f: &mut dyn FnMut(Line<'_>),
    ) {
        // A line lying wholly inside a piece no longer than the cap cannot exceed the cap:
        // only a line continuing a buffered tail needs its length checked.
        for piece in chunk.chunks(self.max_len.max(1)) {
            self.feed_piece_sparse(piece, needles, f);
        }
    }

    fn feed_piece_sparse(
        &mut self,
        mut chunk: &[u8],
        needles: &[memchr::memmem::Finder<'_>],
        f: &mut dyn FnMut(Line<'_>),
    ) {
        if !self.buf.is_empty() || self.overflow.is_some() {
            let Some(nl) = memchr::memchr(b'\n', chunk) else {
                self.push_partial(chunk);
                return;
            };
            self.feed(&chunk[..=nl], f);
            chunk = &chunk[nl + 1..];
        }
        let Some(last_nl) = memchr::memrchr(b'\n', chunk) else {
            self.push_partial(chunk);
            return;
        };
        let region = &chunk[..=last_nl];
        let mut pos = 0;
        // The next match of each needle at or after `pos`, searched again only once `pos`
        // has passed it: every needle's search moves forward only.
        let mut next: Vec<Option<usize>> = needles.iter().map(|n| n.find(region)).collect();
        loop {
            for (n, at) in needles.iter().zip(next.iter_mut()) {
                if at.is_some_and(|m| m < pos) {
                    *at = n.find(&region[pos..]).map(|m| m + pos);
                }
            }
            let Some(m) = next.iter().flatten().min().copied() else {
                break;
            };
            let start = memchr::memrchr(b'\n', &region[pos..m]).map_or(pos, |i| pos + i + 1);
            let end =
                m + memchr::memchr(b'\n', &region[m..]).expect("the region ends with a newline");
            if start > pos {
                let gap = &region[pos..start];
                self.line_no += memchr::memchr_iter(b'\n', gap).count();
                f(Line::Gap(gap));
            }
            self.line_no += 1;
            f(Line::Text(self.line_no, strip_cr(&region[start..end])));
            pos = end + 1;
        }
        if pos < region.len() {
            let gap = &region[pos..];
            self.line_no += memchr::memchr_iter(b'\n', gap).count();
            f(Line::Gap(gap));
        }
        self.push_partial(&chunk[last_nl + 1..]);
    }

    fn push_partial(&mut self, part: &[u8]) {
        if let Some(seen) = &mut self.overflow {
            *seen += part.len();
        } else if self.buf.len() + part.len() > self.max_len {
            self.overflow = Some(self.buf.len() + part.len());
            self.buf = Vec::new();
        } else {
            self.buf.extend_from_slice(part);
        }
    }

    /// Ends the stream: a last line without a newline is still a line.
    pub(crate) fn finish(&mut self, f: &mut dyn FnMut(Line<'_>)) {
        if let Some(seen) = self.overflow.take() {
            self.line_no += 1;
            f(Line::TooLong(self.line_no, seen));
        } else if !self.buf.is_empty() {
            self.line_no += 1;
            let line = std::mem::take(&mut self.buf);
            f(Line::Text(self.line_no, strip_cr(&line)));
        }
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(chunks: &[&[u8]], max: usize) -> Vec<String> {
        let mut s = LineSplitter::new(max);
        let mut out = Vec::new();
        let mut f = |l: Line<'_>| {
            out.push(match l {
                Line::Text(n, t) => format!("{n}:{}", String::from_utf8_lossy(t)),
                Line::TooLong(n, len) => format!("{n}:too long ({len})"),
                Line::Gap(g) => format!("gap:{}", String::from_utf8_lossy(g)),
            })
        };
        for c in chunks {
            s.feed(c, &mut f);
        }
        s.finish(&mut f);
        out
    }

    #[test]
    fn splits_across_chunks_with_crlf_and_caps() {
        assert_eq!(
            collect(&[b"ab\r\ncd", b"e\nf"], 10),
            ["1:ab", "2:cde", "3:f"]
        );
        assert_eq!(
            collect(&[b"0123456789AB\nok\n"], 10),
            ["1:too long (12)", "2:ok"]
        );
        assert_eq!(
            collect(&[b"01234", b"56789", b"AB", b"CD\nok"], 10),
            ["1:too long (14)", "2:ok"]
        );
        assert_eq!(collect(&[b"\n\n"], 10), ["1:", "2:"]);
        assert_eq!(collect(&[b"0123456789\n"], 10), ["1:0123456789"]);
    }

    #[test]
    fn sparse_hands_out_matching_lines_and_gaps_with_the_same_numbers() {
        let finder = [
            memchr::memmem::Finder::new(b"!!"),
            memchr::memmem::Finder::new(b"??"),
        ];
        let mut s = LineSplitter::new(16);
        let mut out = Vec::new();
        let mut f = |l: Line<'_>| {
            out.push(match l {
                Line::Text(n, t) => format!("{n}:{}", String::from_utf8_lossy(t)),
                Line::TooLong(n, len) => format!("{n}:too long ({len})"),
                Line::Gap(g) => format!("gap:{}", g.len()),
            })
        };
        s.feed_sparse(b"a\nb!!\r\nc\n??d\n!! ?? !!\nlong-line-", &finder, &mut f);
        s.feed_sparse(b"that-goes-on\ne\n", &finder, &mut f);
        s.finish(&mut f);
        assert_eq!(
            out,
            [
                "gap:2",
                "2:b!!",
                "gap:2",
                "4:??d",
                "5:!! ?? !!",
                "6:too long (22)",
                "gap:2"
            ]
        );
        assert_eq!(s.line_no(), 7);
    }
}
