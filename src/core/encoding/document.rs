//! Compact binary document encoding (to be written).
