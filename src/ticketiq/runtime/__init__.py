"""What a long-running process does beside its work, below everything that runs in one: loops kept
running beside requests (`background.py`), the stall watch (`stall.py`), fault points for kill trials
(`faults.py`), the outbound User-Agent (`user_agent.py`) and interpreter tuning at start (`interpreter.py`).

May import only the base modules (settings, errors) and libraries.
"""
