"""What a long-running process does beside its work, below everything that runs in one: loops kept
running beside requests (`background.py`), the stall watch (`stall.py`), fault points for kill trials
(`faults.py`), the outbound User-Agent (`user_agent.py`), interpreter tuning at start (`interpreter.py`) and
its log lines: secrets scrubbed, the run and trace in context, JSON when asked (`logs.py`).

May import only the base modules (settings, errors) and libraries.
"""
