"""The read side: questions answered from the store, and answers rendered for the
people and tools that read them. `query` answers `status`, `history` and `show`
(the store joined with the verdict of `qualification/`); `render` puts answers in
80 columns and `render_verification` the verification report (apart, so that
`ledger verify FILE` loads no other rendering); `formats` gives the verdict as
Markdown, JUnit XML and a GitHub check run, `standard` as the predicates other
tools read (in-toto test-result, SLSA verification summary), `calibration` what
admission receipts say about an estimator; `humanize` and `inert` are the text
helpers every rendering shares (values for people; signed text made inert where
it is shown). Only the surfaces (`cli/`, `service/`) and the reports beside them
(`execution.said`, `trend.figures`: the text helpers) import it; it reads the
store, the verdict and the evidence, and never writes: nothing here imports the
write path, a server client or `runners`. Importing this package imports none of
its modules."""
