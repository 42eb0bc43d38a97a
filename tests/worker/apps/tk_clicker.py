"""A small Tk window for the desktop tests: one big grey button that turns green and says
"Clicked" when clicked, with a context menu on a right-click. It writes its state as JSON to
the file named on the command line (its screen geometry once mapped, then the click), so a
test can probe instead of sleeping."""

import json
import sys
import tkinter as tk

state_file = sys.argv[1]
root = tk.Tk()
root.title("CODA Tk test")
root.geometry("320x200+200+150")
button = tk.Button(root, text="Click me", bg="#808080", activebackground="#808080",
                   relief="flat", highlightthickness=0, bd=0)
button.pack(fill="both", expand=True)
state: dict[str, object] = {"clicked": False}


def write() -> None:
    with open(state_file, "w") as out:
        json.dump(state, out)


def mapped(_event: object) -> None:
    root.update_idletasks()
    state.update(x=button.winfo_rootx(), y=button.winfo_rooty(), width=button.winfo_width(),
                 height=button.winfo_height())
    write()


def clicked() -> None:
    button.config(text="Clicked", bg="#20c020", activebackground="#20c020")
    state["clicked"] = True
    write()


menu = tk.Menu(root, tearoff=0)
menu.add_command(label="Nothing")
button.config(command=clicked)
button.bind("<Map>", mapped)
button.bind("<ButtonRelease-3>", lambda event: menu.tk_popup(event.x_root, event.y_root))
root.mainloop()
