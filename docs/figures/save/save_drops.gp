# Drawn by `kvtier report`; redraw from this folder with: gnuplot save_drops.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'save_drops.svg'
set termoption noenhanced
set title 'Saves dropped against the target rate'
set xlabel 'target rate (GB/s)'
set ylabel 'saves dropped'
set grid
set key below
set yrange [0:*]
$d0 << EOD
0.589689 0
0.884534 0
1.03196 0
1.10567 0
1.17938 0
2.35876 0
4.71751 0
EOD
$d1 << EOD
1.17938 0
1.3268 0
1.47422 0
1.76907 0
2.35876 0
4.71751 0
EOD
$d2 << EOD
0.589689 0
0.884534 0
0.958245 0
1.03196 0
1.17938 0
2.35876 0
4.71751 0
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'dropped: file:///work/bench-save, llama-3.1-8b (save-file-llama-8b-0535.json)', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'dropped: file:///work/bench-save, llama-3.1-8b (save-file-llama-8b.json)', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 1 title 'dropped: fs:///work/bench-save, llama-3.1-8b (save-fs-llama-8b.json)'
