// SwiftPM needs one source file per C target; the header is the point.
