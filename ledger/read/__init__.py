"""The read side: questions answered from the store, and answers rendered for the
people and tools that read them. `reader` is where every command that reads asks,
the ledger here or a `ledger serve` (`Reader`, so no command branches on which, as
`write.record.Recorder` is for writers); `query` answers `status`, `history` and
`show` (the store joined with the verdict of `qualification/`), `subject` names the
revision a question without a checkout is about; `render` puts answers in
80 columns and `render_verification` the verification report (apart, so that
`ledger verify FILE` loads no other rendering); `formats` gives the verdict as
Markdown, JUnit XML and a GitHub check run, `standard` as the predicates other
tools read (in-toto test-result, SLSA verification summary), `calibration` what
admission receipts say about an estimator; `humanize` and `inert` are the text
helpers every rendering shares (values for people; signed text made inert where
it is shown). Only the surfaces (`cli/`, `service/`) and the reports beside them
(`execution.said`) import it; it reads the
store, the verdict and the evidence, and never writes: of the write path it reads
only the artifact store, of a server only what its client fetches, and nothing here
imports `runners`. Importing this package imports none of its modules."""
