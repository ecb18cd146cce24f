"""A worked example of a TicketIQ tool package: a small tasks vendor (`service`) and its tools (`tools`)."""
